"""The DeepSpeed ZeRO strategy (registered as zero0 to zero3) and the pieces it is made of.

strategy.py is the Strategy itself; beside it, one module per job: accel.py (which DeepSpeed
accelerator runs, native CPU fp16), batchnorm.py (BatchNorm in fp32 under half precision),
checkpoint.py (ZeRO state <-> the neutral checkpoint format), compat.py (what the core reconciles
in DeepSpeed's engine), config.py (the DeepSpeed config from the plugin and the core's values),
noise.py (DeepSpeed's known, harmless output shown once), outputs.py (dataclass outputs under
ZeRO-3) and state.py (consolidated state dicts).

Nothing is imported here: the registry imports strategy.py only when a DeepSpeed strategy is
asked for (after `require_deepspeed()`), and no module of this package imports deepspeed at
module level, so `import accelerate_core` never imports it.
"""
