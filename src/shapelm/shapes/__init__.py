"""The shapes of the models, on paper: parameter, FLOP and KV-cache accounting (`accounting`),
the budget solver that finds widths for a parameter target (`solver`) and its Pareto search over
several targets at once (`solver_pareto`). Pure arithmetic over model configs; no torch.
"""
