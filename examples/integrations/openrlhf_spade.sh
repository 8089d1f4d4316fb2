#!/usr/bin/env bash
# OpenRLHF (>= 0.10) GRPO on spade environments, with spade_gym's agent function.
#
#   python examples/integrations/prepare_data.py --format openrlhf --out ~/data/spade
#   ray start --head --num-gpus 8
#   bash examples/integrations/openrlhf_spade.sh
#
# spade-gym must be installed where OpenRLHF's vLLM engines run (they execute the agent function).
# SPADE_REGISTRY names a registry folder when the dataset uses environments beyond the bundled seed
# library; SPADE_OPENRLHF_MAX_TURNS caps agent turns per episode.
set -euo pipefail
DATA="${DATA:-$HOME/data/spade}"
AGENT_FUNC="$(python -c 'import spade_gym.integrations.openrlhf_agent as m; print(m.__file__)')"

python -m openrlhf.cli.train_ppo_ray \
  --actor.model_name_or_path Qwen/Qwen2.5-1.5B-Instruct \
  --train.agent_func_path "$AGENT_FUNC" \
  --data.prompt_dataset "$DATA/openrlhf_train.jsonl" \
  --data.input_key prompt \
  --data.label_key label \
  --data.apply_chat_template \
  --algo.advantage.estimator group_norm \
  --algo.kl.use_loss \
  --algo.kl.estimator k3 \
  --rollout.n_samples_per_prompt 8 \
  --rollout.batch_size 64 \
  --rollout.temperature 1.0 \
  --train.batch_size 512 \
  --actor.num_nodes 1 \
  --actor.num_gpus_per_node 8 \
  --vllm.num_engines 4 \
  --vllm.tensor_parallel_size 1 \
  --train.colocate_all \
  --vllm.enable_sleep \
  --ckpt.output_dir ./checkpoints/openrlhf_spade \
  "$@"
