"""``make gpu-report``: measure the engine on a CUDA machine and write gpu-report/report.{json,md}.

``collect`` (needs CUDA and torch) runs the measurements; ``writer`` (torch-free) writes them.
"""
