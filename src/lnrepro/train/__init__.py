"""Training: fairseq-style batching, the lr schedule, label-smoothed loss, the resumable loop, gradient statistics.

Modules (one job each): batching (read_ids, batch_by_size, collate, epoch_order), schedule (lr_at,
used_settings), loss (label_smoothed_nll_loss), optim (the optimizer registry, build_optimizer), step
(train_step: the one update, which the loop and the bench run), gradstats (gradient norms), checkpoint (state/
folder, digests, last state, RNG), loop (train_run).
"""
