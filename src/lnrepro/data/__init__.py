"""Corpus preparation: download, tokenization, and one module per dataset (iwslt14, multi30k, synthetic).

Every dataset writes the same files through :func:`lnrepro.data.prepared.write_prepared`.
"""
