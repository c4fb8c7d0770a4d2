"""FedKSeed example app."""
