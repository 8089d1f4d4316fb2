"""The bundled seed library: one folder per environment under ``envs/`` (``env.py`` and
``meta.json``). It lives at the top of the repository and ships in the wheel as the package
``spade_gym.envs_registry``; :func:`spade_gym.registry.gymnasium.bundled_registry_path` finds it."""
