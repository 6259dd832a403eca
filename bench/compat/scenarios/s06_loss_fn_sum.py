"""model.loss_fn replaced by CrossEntropyLoss(reduction="sum"), default step, SGD."""
import torch

from _observe import idp_rows, nnx, toy_data, toy_model, weights


def observe(o):
    model = toy_model()
    model.loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    _, _, loader = toy_data()
    optim = nnx.NNOptimParams(name=nnx.Optims.SGD, max_lr=0.01, momentum=0.0, weight_decay=0.0)
    run = model.train(nnx.NNTrainParams(n_epochs=1, optim=optim, train_loader=loader, val_loader=loader))
    o["idps"] = idp_rows(run.idps)
    o["val_loss"] = float(run.idps[-1].val_edp.loss)
    o["weights"] = weights(model.net)
    o["evaluate.loss"] = float(model.evaluate(loader).loss)
