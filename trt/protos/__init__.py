"""Generated protobuf/gRPC modules for Triton's wire contract; regenerate with scripts/generate_protos.py"""
