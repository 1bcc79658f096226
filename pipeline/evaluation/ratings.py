"""The Bradley–Terry fit: Elo-scale ratings with standard errors from match results."""

from __future__ import annotations

import math

import torch

from pipeline.evaluation.matches import MatchStats


def bradley_terry(
    names: list[str], matches: list[MatchStats], iterations: int = 10_000, tol: float = 1e-10
) -> dict[str, dict[str, float]]:
    """Maximum-likelihood Bradley–Terry ratings on the Elo scale from all match results.

    Draws count as half a win for each side. A prior of one virtual draw per pair that played
    keeps ratings finite when an entrant wins every game. Solved by the MM iterations of Hunter
    (2004), ``γ_i ← W_i / Σ_j n_ij / (γ_i + γ_j)``; ratings are ``400·log10(γ)`` shifted so
    their mean is 1500. Standard errors come from the inverse Fisher information.
    """
    index = {n: i for i, n in enumerate(names)}
    k = len(names)
    wins = torch.zeros(k, k, dtype=torch.float64)  # wins[i, j]: points of i against j
    games = torch.zeros(k, k, dtype=torch.float64)
    for m in matches:
        i, j = index[m.agent], index[m.opponent]
        wins[i, j] += m.wins + 0.5 * m.draws
        wins[j, i] += m.losses + 0.5 * m.draws
        games[i, j] += m.episodes
        games[j, i] += m.episodes
    played = games > 0
    wins += 0.5 * played
    games += 1.0 * played
    total = wins.sum(1)
    gamma = torch.ones(k, dtype=torch.float64)
    for _ in range(iterations):
        denom = (games / (gamma[:, None] + gamma[None, :])).sum(1)
        new = torch.where(denom > 0, total / denom.clamp_min(1e-300), gamma)
        new = new / torch.exp(torch.log(new).mean())
        done = bool((torch.log(new) - torch.log(gamma)).abs().max() < tol)
        gamma = new
        if done:
            break
    theta = torch.log(gamma)
    p = torch.sigmoid(theta[:, None] - theta[None, :])
    info = -games * p * (1 - p)
    info.diagonal().copy_(-info.sum(1))
    cov = torch.linalg.pinv(info)  # the null direction (a common shift) is the anchor's freedom
    scale = 400 / math.log(10)
    ratings = scale * theta
    ratings = ratings - ratings.mean() + 1500
    stderr = scale * cov.diagonal().clamp_min(0).sqrt()
    return {n: {"elo": float(ratings[i]), "stderr": float(stderr[i])} for i, n in enumerate(names)}
