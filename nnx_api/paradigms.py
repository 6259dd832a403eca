"""NNx path ``nnx.paradigms``: placeholders, out of scope here (nnx_api/nnx_paths.py).

Training paradigms: knowledge distillation (``kd_train_step_factory``) is here; NNx's other
paradigms import as placeholders."""

from nnx_api.scope import PARADIGMS, placeholder
from nnx_api.training.paradigms import kd_train_step_factory

_OUT = (
    "feature_kd_train_step_factory", "born_again_train", "simclr_train_step_factory", "nt_xent_loss",
    "mixup_train_step_factory", "cutmix_train_step_factory", "moe_train_step_factory", "jepa_train_step_factory",
    "build_target_encoder", "update_ema", "random_block_mask", "JEPAPredictor", "JEPAObjective", "jepa_objective",
    "JEPATrainStep", "dpo_train_step_factory", "TeacherRecord", "TeacherDataset", "OfflineDistillationObjective",
    "evaluate_offline", "read_teacher_records", "write_teacher_records",
)
globals().update({name: placeholder(f"nnx.paradigms.{name}", PARADIGMS) for name in _OUT})

__all__ = ["kd_train_step_factory", *_OUT]
