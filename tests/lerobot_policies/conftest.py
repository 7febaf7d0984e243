from lerobot_testkit import act_pusht, diffusion_metaworld, lerobot_py  # noqa: F401 - fixtures
