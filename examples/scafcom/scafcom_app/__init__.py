"""SCAFCOM example app."""
