"""aiter/test_common.py (simulated): the logging helpers op_tests use (calling blocks, checkAllclose)."""

from . import logger
from ._sim.frame import columns_of, to_markdown


def log_args(func_name, callargs):
    prefix = f"calling {func_name}("
    blanks = " " * (len(prefix))
    info = [f"{el:<28} = {callargs[el]}" for el in callargs]
    info = f",\n{blanks}".join(info)
    logger.info(f"\n{prefix}{info})")


def checkAllclose(msg="", rtol=1e-2, atol=1e-2, err_ratio=0.0):
    logger.info(f"{msg}[checkAllclose {atol=} {rtol=} \033[32mpassed~\033[0m]")
    return err_ratio


def log_summary(name, rows):
    """aiter.logger.info('<name> summary (markdown):\\n%s', pd.DataFrame(rows).to_markdown(index=False))"""
    cols = columns_of(rows)
    df_md = to_markdown(cols, rows)
    logger.info("%s summary (markdown):\n%s", name, df_md)
    return cols
