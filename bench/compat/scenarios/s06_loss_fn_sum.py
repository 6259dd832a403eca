"""model.loss_fn replaced by CrossEntropyLoss(reduction="sum"), default step, SGD."""
import torch

from _observe import fixed_weights, idp_rows, nnx, toy_data, weights


def observe(o):
    model = nnx.NNModel(nnx.NNParams(input_dim=4, output_dim=3, hidden_dims=[8], dropout_prob=0.0,
                                      activation=nnx.Activations.RELU),
                        nnx.NNModelParams(net=nnx.Nets.FEED_FWD))
    fixed_weights(model.net)
    model.loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    _, _, loader = toy_data()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.01, momentum=0.0, weight_decay=0.0)
    run = model.train(nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=loader, val_loader=loader))
    o["idps"] = idp_rows(run.idps)
    o["val_loss"] = float(run.idps[-1].val_edp.loss)
    o["weights"] = weights(model.net)
    o["evaluate.loss"] = float(model.evaluate(loader).loss)
