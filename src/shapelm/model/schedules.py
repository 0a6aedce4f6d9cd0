"""Per-layer width schedules: tapered (002), three-block (002 Figure 2), layer-wise scaling (003).

Registered into `shapelm.model.builders` as kinds "tapered", "blocks" and "lws".
"""
