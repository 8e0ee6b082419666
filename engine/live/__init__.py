"""The live service: controller, actuator, node agent, metrics."""
