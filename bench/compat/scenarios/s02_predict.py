"""predict / predict_proba: what comes back, its types, dtypes and shapes."""
import numpy as np
import torch

from _observe import describe, floats, nnx, toy_data, toy_model


def observe(o):
    model = toy_model()
    x, _, loader = toy_data()
    r = model.predict(X=x)
    o["predict.type"] = type(r).__name__
    o["predict.is_tuple"] = isinstance(r, tuple)
    o["predict.len"] = len(r)
    o["predict.logits"] = describe(r.logits)
    o["predict.classes"] = describe(r.classes)
    o["predict.logits_values"] = floats(r.logits)
    o["predict.classes_values"] = [int(c) for c in np.asarray(r.classes).reshape(-1)]
    o.call("predict_numpy.classes", lambda: model.predict(X=x.numpy()).classes, describe)
    o.call("predict_numpy.logits", lambda: model.predict(X=x.numpy()).logits, describe)
    o.call("predict_loader.logits", lambda: model.predict(X=loader).logits, describe)
    o.call("predict_empty_loader", lambda: model.predict(X=[]), describe)
    p = o.call("predict_proba.type", lambda: model.predict_proba(x), lambda v: type(v).__name__)
    if p is not None:
        for field in ("logits", "probabilities", "decoded", "sample_ids", "spec"):
            o[f"predict_proba.{field}"] = describe(getattr(p, field, "<no attribute>"))
    spec = nnx.ProbabilitySpec(kind="categorical")
    q = o.call("predict_proba_spec.type", lambda: model.predict_proba(x, spec=spec), lambda v: type(v).__name__)
    if q is not None:
        for field in ("logits", "probabilities", "decoded", "sample_ids"):
            o[f"predict_proba_spec.{field}"] = describe(getattr(q, field))
        o["predict_proba_spec.row_sums"] = floats(torch.as_tensor(np.asarray(q.probabilities)).sum(-1))
        o["predict_proba_spec.decoded_values"] = [int(c) for c in np.asarray(q.decoded).reshape(-1)]
        o["predict_proba_spec.sample_ids"] = [int(i) for i in np.asarray(q.sample_ids).reshape(-1)]
    o["net_training_flag_after"] = model.net.training
