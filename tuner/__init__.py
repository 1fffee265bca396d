"""tuner: a fast Texel tuner for hand-crafted chess evaluations."""
