"""Training: fairseq-style batching, the lr schedule, label-smoothed loss, the resumable loop, gradient statistics.

Modules (one job each): batching (read_ids, batch_by_size, collate, epoch_order), schedule (lr_at), loss
(label_smoothed_nll_loss), step (train_step: the one update, which the loop and the bench run, with the
optimizer lnrepro.optimizers builds), gradstats (gradient norms), checkpoint (state/ folder, digests, last
state, RNG), loop (train_run).
"""
