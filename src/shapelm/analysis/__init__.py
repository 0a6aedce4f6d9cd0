"""Analyses of trained models that are not evaluations against a benchmark.

    novelty: how aligned each layer's MLP and block outputs are with the residual stream they
             are added to (Tapered LMs, arXiv 2606.23670 Section 4 / Figure 4).
"""
