"""Special-symbol ids shared by BPE, model, training and decoding: fairseq's order (docs/architecture.md, "Vocabulary")."""

BOS = 0
PAD = 1
EOS = 2
UNK = 3
