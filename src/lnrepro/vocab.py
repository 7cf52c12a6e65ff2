"""Special-symbol ids shared by BPE, model, training and decoding (fairseq's dictionary order, design.md)."""

BOS = 0
PAD = 1
EOS = 2
UNK = 3
