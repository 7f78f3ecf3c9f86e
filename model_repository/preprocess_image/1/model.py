"""Turn raw 8-bit RGB images (HWC bytes, one BYTES element per image) into normalized CHW FP32.

The per-channel mean and standard deviation are ImageNet's, as most vision models expect.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(3, 1, 1)


class TritonPythonModel:
    def initialize(self, args):
        # The image size comes from the config's parameters; 64x64 (cnn_onnx's input) where a config
        # written without them (`trt repo add`) leaves them out.
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.height = int(parameters.get("HEIGHT", {}).get("string_value", "64"))
        self.width = int(parameters.get("WIDTH", {}).get("string_value", "64"))

    def execute(self, requests):
        expected = self.height * self.width * 3
        responses = []
        for request in requests:
            images = pb_utils.get_input_tensor_by_name(request, "IMAGE").as_numpy().reshape(-1)
            sizes = [len(image) for image in images]
            if any(size != expected for size in sizes):
                message = f"each IMAGE must be {self.height}x{self.width} RGB, {expected} bytes; got {sizes}"
                error = pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            pixels = np.stack([np.frombuffer(image, dtype=np.uint8) for image in images])
            pixels = pixels.reshape(-1, self.height, self.width, 3).transpose(0, 3, 1, 2)
            normalized = (pixels.astype(np.float32) / 255.0 - MEAN) / STD
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PIXELS", normalized)]))
        return responses
