# python -m kiln: kiln's command line.
#   python -m kiln export SCRIPT.py:FACTORY OUT_DIR [--name N] [--target CPU]
#                         [--embed-weights] [--no-check]
# FACTORY (a function in SCRIPT.py, or in an importable module "pkg.mod:FACTORY")
# takes no arguments and returns (model_or_function, example_inputs), optionally
# with a dict of example keyword arguments third. Depends on kiln.
import argparse
import importlib
import importlib.util
import os
import sys


def _load_factory(spec):
    if ":" not in spec:
        raise SystemExit(f"kiln export: expected SCRIPT.py:FACTORY or module:FACTORY, got {spec!r}")
    where, attribute = spec.rsplit(":", 1)
    if where.endswith(".py") or os.path.sep in where:
        path = os.path.abspath(where)
        if not os.path.exists(path):
            raise SystemExit(f"kiln export: no such file {where}")
        module_spec = importlib.util.spec_from_file_location("_kiln_export_script", path)
        module = importlib.util.module_from_spec(module_spec)
        sys.path.insert(0, os.path.dirname(path))
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise SystemExit(f"kiln export: {where} has no function {attribute}")
    return factory


def _export(arguments):
    import kiln

    made = _load_factory(arguments.spec)()
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise SystemExit("kiln export: the factory must return (model_or_function, example_inputs"
                         "[, example_kwargs])")
    target, inputs = made[0], made[1]
    kwargs = made[2] if len(made) == 3 else None
    try:
        result = kiln.export(target, inputs, arguments.out_dir, name=arguments.name,
                             target=arguments.target, embed_weights=arguments.embed_weights,
                             example_kwargs=kwargs, check=not arguments.no_check)
    except kiln.Unsupported as error:
        raise SystemExit(f"kiln export: {error}")
    print(f"exported {result.name}: {result.kernels} kernels, {len(result.weights)} weights, "
          f"{result.milliseconds:.0f} ms")
    for path in result.files:
        print("  " + path)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m kiln")
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="compile a model ahead of time into an object "
                                 "file, a shared library and a C header")
    export.add_argument("spec", help="SCRIPT.py:FACTORY or module:FACTORY; FACTORY() returns "
                        "(model_or_function, example_inputs[, example_kwargs])")
    export.add_argument("out_dir")
    export.add_argument("--name", help="the C name (default: from the model or function)")
    export.add_argument("--target", help="an LLVM CPU name, e.g. x86-64-v3 (default: this CPU)")
    export.add_argument("--embed-weights", action="store_true",
                        help="put the weights in the object file too")
    export.add_argument("--no-check", action="store_true",
                        help="do not run the export against eager PyTorch")
    arguments = parser.parse_args(argv)
    if arguments.command == "export":
        _export(arguments)


if __name__ == "__main__":
    main()
