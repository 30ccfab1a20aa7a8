"""The top floor: the programs people run (``gpucaas``, ``caasctl``, the sandbox, doctor).

Programs import services and the core; nothing below imports a program.
"""
