"""Privacy: accountants that persist (clients), the tree mechanism and shuffle protocols."""
