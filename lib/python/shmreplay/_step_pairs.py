"""The draw of transitions stored as consecutive steps of one env, which shmreplay.sb3 and the actor adapters
(shmreplay.gymnasium, shmreplay.pufferlib, through _env_steps) share.

Both store an env's stream of steps with each observation once: a *reset step* (field ``first`` True) holds an
episode's first observation, each later step the observation an action led to. A transition is a pair of consecutive
steps of one env whose second is not a reset step; :func:`draw` samples rows whose first two steps are one.
"""
import numpy as np

import shmreplay

MAX_ROUNDS = 64  # sample calls that may each give no transition before a draw is refused


def draw(sampler, batch_size, length, *, episodes, where, module="shmreplay"):
    """``batch_size`` rows of ``length`` steps of one env each whose first two steps are a transition, drawn
    uniformly over the stored transitions: ``(fields, mask, env_ids, starts)`` as a Batch has them (fields a dict of
    arrays ``[rows, length, ...]``). A row whose pair is no transition (it crosses an end, reaches past the newest
    step, or its second step is a reset step) is drawn again, so the accepted rows stay uniform; after
    ``MAX_ROUNDS`` draws without one, ``EmptyView`` (naming ``where``, the buffer)."""
    batch = sampler.sample("replay", batch_size, length, 0.0, episodes=episodes)
    fields, mask = dict(batch.fields), batch.mask
    env_ids, starts = np.array(batch.env_ids), np.array(batch.starts)
    bad = np.flatnonzero(~(mask[:, 1] & ~fields["first"][:, 1]))
    for _ in range(MAX_ROUNDS):
        if len(bad) == 0:
            return fields, mask, env_ids, starts
        more = sampler.sample("replay", len(bad), length, 0.0, episodes=episodes)
        good = np.flatnonzero(more.mask[:, 1] & ~more["first"][:, 1])[:len(bad)]
        into = bad[:len(good)]
        for key in fields:
            fields[key][into] = more[key][good]
        mask[into] = more.mask[good]
        env_ids[into], starts[into] = more.env_ids[good], more.starts[good]
        bad = bad[len(good):]
    raise shmreplay.EmptyView(f"{module}: buffer '{where}' holds no transition ({MAX_ROUNDS} draws found none)")
