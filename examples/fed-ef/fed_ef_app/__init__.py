"""Fed-EF example app."""
