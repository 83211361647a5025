"""Run inside the environment to check (`patchwheel diagnose --python PATH`): load a saved checkpoint the way
the user does and print accelerate's dispatch diagnosis. Needs transformers and a +fixed accelerate.

    python diagnose_probe.py CHECKPOINT MAX_MEMORY_JSON OFFLOAD_FOLDER
"""

import json
import sys


def main() -> int:
    checkpoint, max_memory, offload = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    try:
        from accelerate.utils.diagnose import diagnose_model, format_findings
    except ImportError:
        print(
            "error: this environment's accelerate has no dispatch diagnosis\n"
            "  fix: install the +fixed build (pip install accelerate==<version>+fixed); "
            "`nox -s status -- --python ...` shows what is installed",
            file=sys.stderr,
        )
        return 2
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, object] = {"device_map": "auto"}
    if max_memory:
        kwargs["max_memory"] = {int(k) if k.isdigit() else k: v for k, v in max_memory.items()}
    if offload:
        kwargs["offload_folder"] = offload
    model = AutoModelForCausalLM.from_pretrained(checkpoint, **kwargs)
    print(f"device map: {getattr(model, 'hf_device_map', None)}")
    # the max_memory the load used, so that "fits on one device" is judged as accelerate placed the model
    print(format_findings(diagnose_model(model, max_memory=kwargs.get("max_memory"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
