"""FedCG example app."""
