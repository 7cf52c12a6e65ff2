"""Known, deliberate differences from the paper's setup (fairseq 0.9.0 on IWSLT14); the report lists them."""

DEVIATIONS: list[str] = [
    "Vocabulary: one joint sentencepiece BPE model (10,000 pieces, byte fallback) for both languages; "
    "fairseq's IWSLT recipe learns 10,000 subword-nmt merges and builds separate source and target dictionaries.",
    "Padding: source and target are padded on the right with attention masks; fairseq pads the source on the left. "
    "Masked positions do not change any result.",
    "Optimizer: torch.optim.AdamW (decoupled weight decay as fairseq's Adam); its eps is added after the bias "
    "correction, fairseq's before it, a difference negligible at eps 1e-8.",
]
