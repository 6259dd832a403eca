"""A plain NNModel run: SGD, accumulate_grad_batches=2 over 3 batches (a trailing window), validation."""
from _observe import fixed_weights, idp_rows, nnx, seed, toy_data, weights


def observe(o):
    seed(0)
    net_params = nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0,
                                      activation=nnx.Activations.RELU)
    model = nnx.NNModel(net_params, nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    o["init_weights_after_seed0"] = weights(model.net)
    o["state_dict_keys"] = sorted(model.net.state_dict())
    o["loss_fn_type"] = type(model.loss_fn).__name__
    fixed_weights(model.net)
    _, _, loader = toy_data()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.1, momentum=0.0, weight_decay=0.0,
                              accumulate_grad_batches=2)
    params = nnx.NNTrainParams(n_epochs=2, optim=optim, train_loader=loader, val_loader=loader, seed=0)
    run = model.train(params)
    o["run_type"] = type(run).__name__
    o["run_id"] = {"type": type(run.id).__name__, "len": len(run.id)}  # the value differs by design
    o["n_idps"] = len(run.idps)
    o["idps"] = idp_rows(run.idps)
    o["val_loss_last"] = float(run.idps[-1].val_edp.loss)
    o["weights"] = weights(model.net)
    o["net_training_flag_after"] = model.net.training
