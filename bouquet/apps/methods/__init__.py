"""Declarations of the built-in methods, one module per family.

Every module here exposes ``METHODS``: a list of :class:`~bouquet.registration.Method`
declarations, one per method, its variants as options. :mod:`bouquet.apps.registry` reads every
module of this package (no entry points): adding a built-in method is one declaration here.
"""
