"""How a worker is started in isolation: the provider contract and one module per backend."""
