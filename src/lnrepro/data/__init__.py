"""Corpus preparation: download, tokenization, and one module per dataset (iwslt14, multi30k, synthetic).

A dataset module lists the files it downloads (``downloads``) and prepares them (``prepare``); the registry
(``lnrepro.data.registry``) finds it by name. Every dataset writes the same files through
:func:`lnrepro.data.prepared.write_prepared` and checks its line counts with
:func:`lnrepro.data.prepared.check_counts`.
"""
