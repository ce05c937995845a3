"""The residual stream: norms, the logit lens, one block's norm and MLP redone by hand, the next-token
candidates, the model's anatomy (parameters per role, a config read like a checklist), and their figures."""
