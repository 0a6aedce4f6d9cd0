# Paper text vs released code: every training-recipe field where they differ, with both values
# and their sources, and the printed numbers the choice changes. Built from the reference data
# (src/shapelm/reference/recipes.yaml), never from a network; shapelm.reference.recipes has the logic.
# Which runs follow which recipe comes from the plan document (work/EXP/plan.json).
from shapelm.reference import RECIPES_PATH

RECIPE_DIFF_OUTPUTS = [
    f"{RESULTS}/tables/recipe_diff.csv",
    f"{RESULTS}/tables/recipe_diff.md",
]


rule recipe_diff:
    """The recipe diff table of this experiment (which runs follow which recipe)."""
    input:
        plan=f"{WORK}/plan.json",
        recipes=str(RECIPES_PATH),
    output:
        RECIPE_DIFF_OUTPUTS,
    log:
        f"{LOGS}/recipe_diff.log",
    localrule: True
    params:
        tables=lambda w, output: os.path.dirname(output[0]),
    shell:
        "shapelm recipe diff {input.plan:q} --write {params.tables:q} > {log:q} 2>&1"
