"""A few parameter mistakes: which exception, and which builtin classes it is."""
from _observe import describe, nnx, toy_data


def observe(o):
    _, _, loader = toy_data()
    sgd = dict(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0)
    probes = {
        "dropout_above_one": lambda: nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=1.5),
        "input_dim_zero": lambda: nnx.NNParams(input_dim=0, output_dim=3, hidden_dims=[8], dropout_prob=0.0),
        "hidden_dim_negative": lambda: nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[-1], dropout_prob=0.0),
        "input_dim_float": lambda: nnx.NNParams(input_dim=4.0, output_dim=3, hidden_dims=[8], dropout_prob=0.0),
        "input_dim_bool": lambda: nnx.NNParams(input_dim=True, output_dim=3, hidden_dims=[8], dropout_prob=0.0),
        "lr_negative": lambda: nnx.NNOptimParams(**{**sgd, "max_lr": -0.1}),
        "lr_nan": lambda: nnx.NNOptimParams(**{**sgd, "max_lr": float("nan")}),
        "accumulate_zero": lambda: nnx.NNOptimParams(**sgd, accumulate_grad_batches=0),
        "accumulate_float": lambda: nnx.NNOptimParams(**sgd, accumulate_grad_batches=2.0),
        "grad_clip_zero": lambda: nnx.NNOptimParams(**sgd, grad_clip_norm=0.0),
        "adam_float_momentum": lambda: nnx.NNOptimParams(name=nnx.Optims.ADAM, max_lr=0.1, momentum=0.9,
                                                         weight_decay=0.0),
        "sgd_eps": lambda: nnx.NNOptimParams(**sgd, eps=1e-6),
        "n_epochs_zero": lambda: nnx.NNTrainParams(n_epochs=0),
        "blank_data_id": lambda: nnx.NNTrainParams(n_epochs=1, data_id="  "),
        "scheduler_factor_zero": lambda: nnx.NNSchedulerParams(min_lr=0.0, factor=0.0, patience=1, cooldown=0,
                                                                threshold=0.0),
        "trainer_no_optims": lambda: nnx.NNTrainerParams(n_epochs=1, optims={}),
        "trainer_sched_unknown_key": lambda: nnx.NNTrainerParams(
            n_epochs=1, optims={"a": nnx.NNOptimParams(**sgd)},
            schedulers={"b": nnx.NNSchedulerParams(min_lr=0.0, factor=0.5, patience=1, cooldown=0, threshold=0.0)}),
        "param_group_lr_and_multiplier": lambda: nnx.NNParamGroupSpec(name_pattern="*", lr=0.1, lr_multiplier=2.0),
        "model_without_net_params": lambda: nnx.NNModel(None, nnx.NNModelParams(net=nnx.Nets.FEED_FWD)),
        "conv_without_conv_params": lambda: nnx.NNModel(
            nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0),
            nnx.NNModelParams(net=nnx.Nets.CONV)),
        "unknown_keyword": lambda: nnx.NNTrainParams(n_epochs=1, n_epoch=2),
    }
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0),
                        nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    probes["train_without_loader"] = lambda: model.train(nnx.NNTrainParams(n_epochs=1))
    probes["train_empty_loader"] = lambda: model.train(nnx.NNTrainParams(n_epochs=1, train_loader=[], data_id="e"))
    probes["train_none_params"] = lambda: model.train(None)
    probes["freeze_no_pattern"] = lambda: model.freeze()
    for name, fn in probes.items():
        o.call(name, fn, lambda v: "ok" if v is not None else None)
    model.freeze("*")
    o.call("train_all_frozen", lambda: model.train(nnx.NNTrainParams(n_epochs=1, train_loader=loader,
                                                                      data_id="f")), describe)
    o["runs_left_behind"] = len(_runs())


def _runs():
    import os
    return sorted(d for d in os.listdir("runs") if not d.startswith(".")) if os.path.isdir("runs") else []
