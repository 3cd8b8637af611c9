"""Proximal Policy Optimization (Schulman et al. 2017) with BatchPPO's adaptive KL penalty (Hafner et al. 2017)."""
