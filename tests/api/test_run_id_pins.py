"""Run identity through the API: the documented vector and 28 pinned run ids never change.

The ids were computed with the code that first shipped each configuration and are hard-coded
here (the core's canonical-JSON rule is proved torch-free in tests/core/test_identity.py)."""

from __future__ import annotations

import pytest

from nnx_core.identity import run_id

VECTOR_ID = "07ac368d1d1c921296512f05023190b4"


def test_api_params_give_the_vector_id():
    import nnx_api as nnx

    model = nnx.NNModel(nnx.NNParams(input_dim=8, output_dim=3, hidden_dims=(32, 16), dropout_prob=0.1),
                        nnx.NNModelParams())
    params = nnx.NNTrainParams(
        n_epochs=10,
        optim=nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=0.01, weight_decay=5e-5),
        scheduler=nnx.NNSchedulerParams(min_lr=1e-7, factor=0.5, patience=3, cooldown=1, threshold=1e-3),
    )
    assert run_id(model.run_config(params, None)) == VECTOR_ID
    # omit-when-default: a later field left at its default does not change the id
    assert run_id(model.run_config(params.replace(save_phase_checkpoints=True), None)) == VECTOR_ID
    assert run_id(model.run_config(params.replace(seed=42), None)) != VECTOR_ID


# Run ids of representative configurations, computed with the code that first shipped them and
# hard-coded here: every existing run id stays byte-identical whatever the params classes and
# their converter become (omit-when-default, lineage, the trainer section, module signatures).
PINNED_IDS = {
    "vector": "07ac368d1d1c921296512f05023190b4",
    "vector_seed42": "436dc13036ca4525e92c9a310ca3577b",
    "data_id_no_phase_salt": "0bcd90392d2c47edff1d09b278ee70d8",
    "net_shape": "3819f1d2eb0969971e635a3a303f3078",
    "sgd_nesterov_clip_accumulate": "ab24679efd5fa767e513146fc4bad154",
    "adamw_eps_param_groups": "e82031c252d544a682c4070320d4a024",
    "sgd_default_momentum": "852fa3b2299d89c5f0c798e1153b7749",
    "default_train": "712f129e39f58d23cd970d1d1c6f9b92",
    "scheduler_plateau_explicit": "730d6ee8aa2b24247d6203ab875f1381",
    "scheduler_step": "40afda9666db7cfc25df043c8eba9140",
    "scheduler_cosine": "e5ff5bf43a72b5da9098dd33a3c99c8a",
    "scheduler_one_cycle_update_clock": "abfce60a162677598ad2aecf1889a975",
    "scheduler_warmup_update_clock": "437401a1c005c79d22a881a223d5560a",
    "metrics_monitor": "2b8afa06b8807ede6046b6df3e086c9c",
    "monitor_train_split": "ef36b2cc81e9903f0146202565697a0c",
    "task_regression": "4a844518063b45edc96d1b1740aa0429",
    "task_categorical_ignore_labels": "992ce2abb54d5c48139c08091f892641",
    "task_multilabel_nll": "331aea662aa1847bd94f673ac6c35240",
    "loss_nll": "58860a8eb2a7f72e76feb9d127d31e16",
    "precision_bf16_fallback": "4f8c5555f9cf2fa76385d6fc9a353cb5",
    "precision_default": "01aa4008b5cc2879849e8e9992bdfe84",
    "lineage_resume": "6b29bcf48203f09190fd362a83b64c97",
    "lineage_parent": "2b0c6fa916387f1f15a94e2039531181",
    "device_cuda": "1f422c2c9c439f4b645be55aa1a7d20a",
    "device_mps": "4538f2602dc18fe052329a0162bcd2b4",
    "custom_module": "d2c6d094078fbd8815b399d32ee476e7",
    "trainer_one_optimizer": "547c081492c2a20ade1ebc985eee55ca",
    "trainer_gan": "dfd179d903fad46f53035333471c423f",
}


def _pinned_config(name):  # noqa: C901 - one table of configurations
    from torch import nn

    import nnx_api as nnx
    from nnx_api.trainer import NNTrainerParams, Trainer

    net = nnx.NNParams(input_dim=8, output_dim=3, hidden_dims=(32, 16), dropout_prob=0.1)
    adam = nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=0.01, weight_decay=5e-5)
    plateau = nnx.NNSchedulerParams(min_lr=1e-7, factor=0.5, patience=3, cooldown=1, threshold=1e-3)

    def train(**changes):
        return nnx.NNTrainParams(**{"n_epochs": 10, "optim": adam, "scheduler": plateau, **changes})

    def model(train_params, net_params=net, salt=None, **model_params):
        return nnx.NNModel(net_params, nnx.NNModelParams(**model_params)).run_config(train_params, salt)

    def optim(**params):
        return model(train(optim=nnx.NNOptimParams(**params)))

    def scheduler(**params):
        return model(train(scheduler=nnx.NNSchedulerParams(**params)))

    def device(value):  # built by hand: NNModel refuses a device this machine lacks
        return {"model": nnx.NNModelParams(device=value).state(), "net": net.state(), "train": train().state()}

    def trainer(params, salt=None):
        return Trainer(nnx.NNModel(net, nnx.NNModelParams())).run_config(params, salt)

    groups = [nnx.NNParamGroupSpec(name_pattern="0.*", lr_multiplier=0.1),
              nnx.NNParamGroupSpec(name_pattern="*.bias", lr=1e-4, weight_decay=0.0)]
    module = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    configs = {
        "vector": lambda: model(train()),
        "vector_seed42": lambda: model(train(seed=42)),
        "data_id_no_phase_salt": lambda: model(train(data_id="digits-v1", save_phase_checkpoints=False), salt="s1"),
        "net_shape": lambda: model(train(), nnx.NNParams(input_dim=20, output_dim=1, hidden_dims=(64,),
                                                         dropout_prob=0.25, activation=nnx.Activations.LEAKY_RELU)),
        "sgd_nesterov_clip_accumulate": lambda: optim(name=nnx.Optims.SGD_NESTEROV, max_lr=0.1, momentum=0.9,
                                                      weight_decay=1e-4, grad_clip_norm=1.0, accumulate_grad_batches=4),
        "adamw_eps_param_groups": lambda: optim(name=nnx.Optims.ADAMW, max_lr=1e-3, momentum=(0.8, 0.99),
                                                weight_decay=1e-2, eps=1e-6, param_groups=groups),
        "sgd_default_momentum": lambda: optim(name=nnx.Optims.SGD),
        "default_train": lambda: model(nnx.NNTrainParams(n_epochs=3)),
        "scheduler_plateau_explicit": lambda: scheduler(kind=nnx.Schedulers.REDUCE_LR_ON_PLATEAU),
        "scheduler_step": lambda: scheduler(kind=nnx.Schedulers.STEP, step_size=2, factor=0.5),
        "scheduler_cosine": lambda: scheduler(kind=nnx.Schedulers.COSINE_ANNEALING, T_max=5, min_lr=1e-6),
        "scheduler_one_cycle_update_clock": lambda: scheduler(kind=nnx.Schedulers.ONE_CYCLE, max_lr=0.1,
                                                              total_steps=100, clock="optimizer_update"),
        "scheduler_warmup_update_clock": lambda: scheduler(kind=nnx.Schedulers.LINEAR_WARMUP_DECAY, warmup_steps=3,
                                                           total_steps=8, clock="optimizer_update"),
        "metrics_monitor": lambda: model(train(
            metrics=[nnx.MetricSpec(id="f1", config={"average": "micro"}), nnx.MetricSpec(id="accuracy", name="acc")],
            monitor=nnx.MonitorSpec(metric="f1", mode="max", min_delta=0.01))),
        "monitor_train_split": lambda: model(train(monitor=nnx.MonitorSpec(split="train", on_missing="error",
                                                                           on_nonfinite="error"))),
        "task_regression": lambda: model(train(), nnx.NNParams(input_dim=8, output_dim=2),
                                         loss=nnx.Losses.MEAN_SQUARED_ERROR, task=nnx.TaskSpec.regression(2)),
        "task_categorical_ignore_labels": lambda: model(
            train(), task=nnx.TaskSpec.categorical(3, ignore_index=-100, labels=["a", "b", "c"])),
        "task_multilabel_nll": lambda: model(train(), loss=nnx.Losses.BINARY_CROSS_ENTROPY,
                                             task=nnx.TaskSpec.multilabel(3, threshold=0.3)),
        "loss_nll": lambda: model(train(), loss=nnx.Losses.NEGATIVE_LOG_LIKELIHOOD),
        "precision_bf16_fallback": lambda: model(train(), precision=nnx.PrecisionPolicy(mode="bf16", fallback="fp32")),
        "precision_default": lambda: model(train(), precision=nnx.PrecisionPolicy()),
        "lineage_resume": lambda: model(train(resume_from_run_id="0123abcd", resume_from_checkpoint="best")),
        "lineage_parent": lambda: model(train(parent_run_id="0123abcd", parent_checkpoint="last")),
        "device_cuda": lambda: device(nnx.Devices.CUDA),
        "device_mps": lambda: device(nnx.Devices.MPS),
        "custom_module": lambda: nnx.NNModel(module=module).run_config(train(), None),
        "trainer_one_optimizer": lambda: trainer(NNTrainerParams(n_epochs=4, optims={"default": adam})),
        "trainer_gan": lambda: trainer(NNTrainerParams(
            n_epochs=5, optims={"gen": adam, "disc": nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.05, momentum=0.5)},
            schedulers={"gen": nnx.NNSchedulerParams(kind=nnx.Schedulers.COSINE_ANNEALING, T_max=5)},
            seed=3, data_id="pairs", save_phase_checkpoints=False, auto_step_schedulers=False,
            metrics=[nnx.MetricSpec(id="accuracy")], monitor=nnx.MonitorSpec(metric="accuracy", mode="max"),
            resume_from_run_id="feedbeef"), salt="t"),
    }
    assert sorted(configs) == sorted(PINNED_IDS)
    return configs[name]()


@pytest.mark.parametrize("name", sorted(PINNED_IDS))
def test_pinned_run_ids_never_change(name):
    assert run_id(_pinned_config(name)) == PINNED_IDS[name]
