"""Starting a training script warm: in a process forked from an interpreter that has imported torch already.

Worker-side and torch-free at import (torch is imported by name, at run time, only where a warm interpreter
preloads it), so both halves of torchjob use it: the local backend's warm interpreter
(``backends/local/warm_interpreter.py``) and a Pod's launcher (``python -m torchjob.launch``, ``pod.py``), which
keeps the interpreter in the container and starts the script again from it when the operator restarts the group.
"""
