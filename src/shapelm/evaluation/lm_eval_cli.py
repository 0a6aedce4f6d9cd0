"""``python -m shapelm.evaluation.lm_eval_cli ARGS``: lm-eval's own command line with the
``shapelm`` model registered (lm-eval 0.4.x does not load models from entry points).

Accepts exactly the ``lm_eval`` arguments, e.g.::

    python -m shapelm.evaluation.lm_eval_cli --model shapelm \\
        --model_args pretrained=runs/x,tokenizer=tokenizer.json \\
        --include_path tasks/ --tasks shapelm_arc_easy --output_path out/
"""

from __future__ import annotations

import sys


def main() -> None:
    import shapelm.evaluation.lm_eval_model  # noqa: F401  (registers "shapelm")
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    sys.exit(main())
