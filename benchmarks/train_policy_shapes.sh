#!/usr/bin/env bash
# The recipe behind `policy:shapes`, from scratch, in two stages (about 80 minutes on two CPU cores):
#
#   bash benchmarks/train_policy_shapes.sh [RUN_DIR]      (default runs/policy-shapes)
#
# 1. base (recipe v12 in the README): a soft behaviour clone of the tuned heuristic (6 episodes,
#    100 Adam steps), then 32 PPO episodes in 4 envs against a paired static twin, with a constant
#    entropy bonus, acting only with conv_heavy in early and mid.
# 2. culls (recipe v22s): the base policy, acting greedily, demonstrates 12 episodes in which a
#    probationary seed is culled exactly when its measured contribution is <= 0 (`sign-culls`);
#    only those keep/cull decisions are cloned (200 steps), with the odds of the other ops held at
#    the base policy's (`--clone-anchor 10`). The one PPO episode after it has learning rate 0: the
#    weights stay as cloned; its observations join the observation normaliser's statistics.
#
# The policy is RUN_DIR/culls/checkpoints/round-0001.pt (use it as policy:PATH). Its floating-point
# results depend on the CPU's kernels: another machine gives another draw of the recipe.
# ESPER names the program to run (default: esper on the PATH), e.g. ESPER=.venv/bin/esper.
# Stopped during stage 1? Go on with `esper ppo --resume last --run-dir RUN_DIR/base --episodes 32`,
# then run stage 2's command below by hand (the script refuses a RUN_DIR that holds a stage).
set -euo pipefail
run_dir="${1:-runs/policy-shapes}"
esper="${ESPER:-esper}"
common=(--slots early mid --blueprints conv_heavy --reward.static_baseline true
        --ppo.ent_coef 0.05 --ppo.ent_coef_final 0.05)
if [[ -e "$run_dir/base" || -e "$run_dir/culls" ]]; then
    echo "train_policy_shapes: error: $run_dir already holds a run (base/ or culls/); choose another RUN_DIR" >&2
    exit 2
fi
"$esper" ppo --episodes 32 --n-envs 4 --clone-episodes 6 --clone-steps 100 --seed 12000 "${common[@]}" \
    --run-dir "$run_dir/base"
"$esper" ppo --init-policy "$run_dir/base/checkpoints/round-0008.pt" "${common[@]}" \
    --ppo.learning_rate 0 --episodes 1 --n-envs 1 --seed 15000 \
    --clone-episodes 12 --clone-teacher sign-culls --clone-decisions cull --clone-steps 200 --clone-anchor 10 \
    --run-dir "$run_dir/culls"
echo "policy: $run_dir/culls/checkpoints/round-0001.pt"
