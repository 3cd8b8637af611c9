# Before any test module imports grpc: the trainer package turns grpcio's fork support off (see its __init__).
import agents_operator.trainer  # noqa: F401
