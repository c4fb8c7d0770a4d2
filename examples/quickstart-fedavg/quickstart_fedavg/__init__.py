"""A Flower quickstart app whose only bouquet line is the strategy import."""
