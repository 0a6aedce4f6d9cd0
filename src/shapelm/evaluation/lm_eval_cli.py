"""``shapelm-lm-eval ARGS`` (or ``python -m shapelm.evaluation.lm_eval_cli ARGS``): lm-eval's own
command line with the ``shapelm`` model registered.

lm-eval 0.4.x finds models only in its own ``MODEL_MAPPING`` and in classes already imported
(``lm_eval.api.registry`` reads no entry-point group), so the plain ``lm_eval`` executable cannot
see ``shapelm``. This is a drop-in ``lm_eval``: same arguments, same output, e.g.::

    shapelm-lm-eval --model shapelm --model_args pretrained=work/EXP/runs/RUN --tasks piqa

(a run directory of the workflow: the tokenizer is the one its training tokens are in; elsewhere
``tokenizer=`` names it). A shapelm error (a missing checkpoint, no tokenizer) is one line.

The plain ``lm_eval`` works on an exported checkpoint (``shapelm export-hf``) with ``--model hf``.
"""

from __future__ import annotations

import sys


def main() -> int:
    from lm_eval.__main__ import cli_evaluate

    import shapelm.evaluation.lm_eval_model  # noqa: F401  (registers "shapelm")
    from shapelm.errors import ShapelmError

    try:
        cli_evaluate()
    except ShapelmError as err:
        print(f"shapelm-lm-eval: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
