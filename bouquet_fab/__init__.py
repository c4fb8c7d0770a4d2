"""flwr-bouquet's Flower App components; see bouquet.apps.fab (generated)."""
