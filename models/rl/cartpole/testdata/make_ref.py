#!/usr/bin/env python3
"""Writes ref.json: reference CartPole-v1 transitions for the Go tests.

Pure Python, no gym: the step below is gym's CartPole-v1 step (euler
kinematics) written out by hand, with the v1 TimeLimit of 500 steps. Run it
from this directory:

    python3 make_ref.py > ref.json

Each trajectory starts from a fixed state (not from reset, whose random
numbers differ between numpy and Go) and applies a fixed rule for the
actions; every transition is recorded so that the Go test can check each
step on its own and the whole trajectory replayed.
"""
import json
import math
import sys

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02
THETA_THRESHOLD = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
MAX_STEPS = 500


def step(state, action):
    x, x_dot, theta, theta_dot = state
    force = FORCE_MAG if action == 1 else -FORCE_MAG
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot**2 * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * costheta**2 / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    terminated = bool(
        x < -X_THRESHOLD
        or x > X_THRESHOLD
        or theta < -THETA_THRESHOLD
        or theta > THETA_THRESHOLD
    )
    return [x, x_dot, theta, theta_dot], 1.0, terminated


def run(name, initial, policy, max_steps=MAX_STEPS):
    state = list(initial)
    actions, states, rewards, terms, truncs = [], [], [], [], []
    for t in range(1, max_steps + 1):
        a = policy(t, state)
        state, r, term = step(state, a)
        trunc = t >= MAX_STEPS
        actions.append(a)
        states.append(state)
        rewards.append(r)
        terms.append(term)
        truncs.append(trunc)
        if term or trunc:
            break
    return {
        "name": name,
        "initial": list(initial),
        "actions": actions,
        "states": states,
        "rewards": rewards,
        "terminated": terms,
        "truncated": truncs,
    }


def balance(t, s):
    x, x_dot, theta, theta_dot = s
    return 1 if theta + 0.5 * theta_dot + 0.05 * x + 0.1 * x_dot > 0 else 0


def main():
    start = [0.012, -0.031, 0.044, -0.017]
    edge_x = 2.4
    above_x = math.nextafter(2.4, math.inf)
    trajs = [
        run("right", start, lambda t, s: 1),
        run("left", start, lambda t, s: 0),
        run("alternate", start, lambda t, s: t % 2),
        run("balance", [0.03, 0.02, -0.04, 0.01], balance),
        # Single steps at the thresholds: with zero velocity x and theta
        # do not move in the first step, so the checks see them exactly.
        run("x_at_threshold", [edge_x, 0.0, 0.0, 0.0], lambda t, s: 1, 1),
        run("x_above_threshold", [above_x, 0.0, 0.0, 0.0], lambda t, s: 1, 1),
        run("x_at_neg_threshold", [-edge_x, 0.0, 0.0, 0.0], lambda t, s: 0, 1),
        run("x_below_neg_threshold", [-above_x, 0.0, 0.0, 0.0], lambda t, s: 0, 1),
        run("theta_at_threshold", [0.0, 0.0, THETA_THRESHOLD, 0.0], lambda t, s: 0, 1),
        run("theta_above_threshold",
            [0.0, 0.0, math.nextafter(THETA_THRESHOLD, math.inf), 0.0], lambda t, s: 0, 1),
        run("theta_at_neg_threshold", [0.0, 0.0, -THETA_THRESHOLD, 0.0], lambda t, s: 1, 1),
        run("theta_below_neg_threshold",
            [0.0, 0.0, -math.nextafter(THETA_THRESHOLD, math.inf), 0.0], lambda t, s: 1, 1),
    ]
    out = {
        "constants": {
            "gravity": GRAVITY,
            "masscart": MASSCART,
            "masspole": MASSPOLE,
            "length": LENGTH,
            "force_mag": FORCE_MAG,
            "tau": TAU,
            "theta_threshold_radians": THETA_THRESHOLD,
            "x_threshold": X_THRESHOLD,
            "max_episode_steps": MAX_STEPS,
        },
        "trajectories": trajs,
    }
    json.dump(out, sys.stdout, separators=(",", ":"))
    print()


if __name__ == "__main__":
    main()
