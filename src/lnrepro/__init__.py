"""lnrepro: a reproduction of Xiong et al. (ICML 2020), Figure 4, and a controlled study past it."""

__version__ = "0.1.0"
