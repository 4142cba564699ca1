"""Notebooks as the record: rewyn-kernel run (execute a notebook) and review (a run log)."""
