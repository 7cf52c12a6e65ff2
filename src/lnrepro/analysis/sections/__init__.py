"""The report's questions, one module each: the tables and sentences of the Answer, the claims, the
confounds, the tuned baselines, the depth study, the norm variants and the findings."""
