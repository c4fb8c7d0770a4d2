"""Federated LinUCB example app."""
