"""`phantora sweep`: many simulations of one program over a grid of its options, the cluster and the environment
(command.py), run here (local.py) or on Ray (on_ray.py), each point a run of its own (points.py)."""
