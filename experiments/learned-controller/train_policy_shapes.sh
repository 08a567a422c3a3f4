#!/usr/bin/env bash
# The recipe behind `policy:shapes`, from scratch (about 90 minutes on one CPU core). Run it from
# the repository root (the --config path below is relative to it):
#
#   bash experiments/learned-controller/train_policy_shapes.sh [RUN_DIR]      (default runs/policy-shapes)
#
# Recipe v23w in the README: a soft behaviour clone of the heuristic tuned with width seeds
# (experiments/growth-frontier/heuristic_shapes_width.toml; 6 episodes, 100 Adam steps), then 32
# PPO episodes in 4 envs against a paired static twin, with a constant entropy bonus, acting with
# widen_50, widen_25 and conv_heavy in all three slots, keeping or culling seeds on the accuracy
# reading of their contribution (Esper's default until 2026-11-27, when v23w trained), without a
# learning-rate warm-up (shapes' default until 2026-11-28). The policy is
# RUN_DIR/checkpoints/round-0008.pt (use it as policy:PATH). Its floating-point results depend on
# the CPU's kernels: another machine gives another draw of the recipe.
# ESPER names the program to run (default: esper on the PATH), e.g. ESPER=.venv/bin/esper.
# Stopped part-way? Go on with `esper ppo --resume last --run-dir RUN_DIR --episodes 32`; a RUN_DIR
# that already holds a run is refused by `esper ppo` itself (one line, exit 2, nothing touched).
set -euo pipefail
run_dir="${1:-runs/policy-shapes}"
esper="${ESPER:-esper}"
"$esper" ppo --episodes 32 --n-envs 4 --clone-episodes 6 --clone-steps 100 --seed 12000 \
    --config experiments/growth-frontier/heuristic_shapes_width.toml \
    --blueprints widen_50 widen_25 conv_heavy --reward.static_baseline true \
    --ppo.ent_coef 0.05 --ppo.ent_coef_final 0.05 --gates.keep_reading accuracy --host.lr_warmup_epochs 0 \
    --run-dir "$run_dir"
echo "policy: $run_dir/checkpoints/round-0008.pt"
