"""SPADE self-play in one screen: one policy designs environments (rewarded with regret) and
learns to solve them (rewarded with the return), through spade_gym's public API.

    python examples/selfplay.py --iterations 2      # the embedded SmolLM2-135M on CPU
    spade selfplay --config examples/selfplay_cpu.yaml   # the same loop with checkpoints, metrics, plots
"""

import argparse
from dataclasses import replace

import gymnasium as gym

from spade_gym import load_policy
from spade_gym.agent import AGENT_TEMPERATURE, Episode, RolloutConfig, rollout
from spade_gym.policies import SamplingParams
from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, open_registry
from spade_gym.trainer import GRPOConfig, GRPOTrainer, samples_from_completions, samples_from_trajectories

parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0].replace("\n", " "), formatter_class=argparse.ArgumentDefaultsHelpFormatter
)
parser.add_argument("--iterations", type=int, default=2, help="self-play iterations")
parser.add_argument("--designs", type=int, default=2, help="G designs per prompt (one GRPO group)")
parser.add_argument("--registry", default="runs/example-registry", help="registry folder (made on first use)")
args = parser.parse_args()

policy = load_policy("default")  # both roles share these weights
# starts with the seed library as memory and replay pool, less the environments held out for evaluation
registry = open_registry(args.registry, exclude=HELD_OUT_SEED_ENVS)
designer = gym.make("spade/Designer-v0", agent=policy, registry=registry).unwrapped
trainer = GRPOTrainer(policy, GRPOConfig(learning_rate=1e-5))
agent_rollout = RolloutConfig(sampling=SamplingParams(temperature=AGENT_TEMPERATURE, max_new_tokens=48), max_turns=2)

for iteration in range(args.iterations):
    # Designer: G programs for one prompt; each is validated, measured (regret) and registered
    _, info = designer.reset(seed=iteration)
    prompt = designer.prompt
    # the Designer's budget for this prompt's mode: edit blocks for a small model, whole modules otherwise
    sampling = replace(designer.config.sampling_for(prompt.mode), n=args.designs, seed=iteration)
    print(f"iteration {iteration}: generating {args.designs} designs ({prompt.mode} mode) ...", flush=True)
    designs = policy.generate([info["messages"]], sampling)
    rewards = []
    for design in designs:
        designer.reset(options={"prompt": prompt})
        _, reward, _, _, info = designer.step(design.text)  # info: the validation report, regret, env id
        rewards.append(reward)
    samples = samples_from_completions(designs, rewards, group=f"designer:{iteration}")

    # Agent: 4 episodes of a replayed environment (prioritised replay) on 4 seeds form a group (a
    # small model answers one seed nearly the same way every time: groups of one seed teach nothing)
    (record,) = registry.sample(1, strategy="replay")
    episodes = [Episode(record.program().source, seed=4 * iteration + j) for j in range(4)]
    trajectories, _ = rollout(episodes, policy, agent_rollout)
    samples += samples_from_trajectories(trajectories, group_by="env")

    # One GRPO update of the shared policy (advantages relative within each role and group)
    stats = trainer.update(samples)  # groups whose rewards are all equal have nothing to teach: no step
    loss = f"{stats.loss:.4f}" if stats.optimizer_steps else "- (all advantages zero)"
    print(
        f"iteration {iteration}: designer rewards {rewards}, agent returns "
        f"{[t.episode_return for t in trajectories]} on {record.env_id}, loss {loss}"
    )
