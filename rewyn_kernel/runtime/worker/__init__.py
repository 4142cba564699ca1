"""The program that runs inside every sandbox (stdlib only, Python 3.8+); see main.py."""
