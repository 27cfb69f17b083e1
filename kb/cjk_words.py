"""Chinese, Japanese and Korean words users write for what the catalogue says in English.

Many users post their trouble in their own language ("多机训练 NCCL 超时", "マルチノードでハング"): the tokenizer keeps
only ASCII words, so without this such a query is searched by its English fragments alone. Each phrase becomes the
catalogue's words before tokenizing; longer phrases are replaced first ("显存不足" before "显存").
"""
from __future__ import annotations

_WORDS = {
    # hangs and timeouts
    "超时": "timeout", "逾時": "timeout", "超時": "timeout", "卡住": "hang", "卡死": "hang", "卡在": "hang at",
    "卡主": "hang", "挂起": "hang", "夯住": "hang", "假死": "hang", "无响应": "hang", "不动": "hang", "死锁": "deadlock",
    "タイムアウト": "timeout", "ハング": "hang", "フリーズ": "hang", "固まる": "hang", "止まる": "hang",
    "デッドロック": "deadlock", "타임아웃": "timeout", "멈춤": "hang", "멈춰": "hang", "멈추": "hang", "교착": "deadlock",
    # memory
    "显存不足": "out of memory", "爆显存": "out of memory", "显存溢出": "out of memory", "内存溢出": "out of memory",
    "内存不足": "out of memory", "メモリ不足": "out of memory", "메모리 부족": "out of memory",
    "共享内存": "shared memory shm", "共有メモリ": "shared memory shm", "공유 메모리": "shared memory shm",
    "显存": "gpu memory", "顯存": "gpu memory", "内存": "memory", "メモリ": "memory", "메모리": "memory",
    # machines, cards, processes
    "多机多卡": "multi-node multi gpu", "单机多卡": "single node multi gpu", "多机": "multi-node",
    "多节点": "multi-node", "跨机": "multi-node", "跨节点": "multi-node", "多卡": "multi gpu", "多显卡": "multi gpu",
    "单卡": "single gpu", "第一张卡": "gpu 0", "0号卡": "gpu 0", "マルチノード": "multi-node",
    "複数ノード": "multi-node", "マルチgpu": "multi gpu", "複数gpu": "multi gpu", "멀티노드": "multi-node",
    "멀티 노드": "multi-node", "다중 노드": "multi-node", "멀티 gpu": "multi gpu", "다중 gpu": "multi gpu",
    "主进程": "main process", "进程": "process", "节点": "node", "ノード": "node", "노드": "node", "プロセス": "process",
    "프로세스": "process", "网卡": "network interface", "ネットワーク": "network", "네트워크": "network",
    "端口被占用": "address already in use port", "端口": "port", "ポート": "port", "포트": "port", "占用": "in use",
    # training words
    "分布式": "distributed", "分散学習": "distributed training", "분산 학습": "distributed training", "分散": "distributed",
    "训练": "training", "訓練": "training", "学習": "training", "학습": "training",
    "微调": "fine-tune", "梯度": "gradient", "勾配": "gradient", "그래디언트": "gradient", "参数": "parameter",
    "未使用": "unused", "同步": "sync", "不同步": "out of sync", "不一致": "mismatch", "混合精度": "mixed precision",
    "数据加载": "dataloader", "批次": "batch", "学习率": "learning rate", "学習率": "learning rate",
    "精度": "accuracy", "精確度": "accuracy", "准确率": "accuracy", "精度下降": "accuracy drops",
    "双卡": "multi gpu", "两张卡": "multi gpu", "多张卡": "multi gpu", "不同": "different", "差距": "different",
    "数据并行": "data parallel", "全参数": "full fine-tune", "多线程": "thread", "数据": "data",
    "梯度累积": "gradient accumulation", "梯度累加": "gradient accumulation", "批大小": "batch size",
    "数据集": "dataset", "采样器": "sampler", "随机种子": "seed", "分片": "shard", "主节点": "master node",
    "从节点": "worker node", "防火墙": "firewall", "网络接口": "network interface", "容器": "container docker",
    "连接": "connection", "断开": "connection closed", "通信失败": "communication fail",
    "地址已被使用": "address already in use", "端口冲突": "port in use", "显卡": "gpu", "多进程": "multi process",
    "缓慢": "slow", "很慢": "slow", "变慢": "slow", "速度慢": "slow", "慢": "slow", "遅い": "slow", "느림": "slow",
    "死机": "hang", "无法启动": "fail to start", "启动": "launch",
    "负载不均": "imbalance", "不均衡": "imbalance", "利用率": "utilization", "环境变量": "environment variable",
    "初始化": "init", "初期化": "init", "초기화": "init", "通信": "communication", "통신": "communication",
    # checkpoints and logs
    "断点续训": "resume checkpoint", "断点": "checkpoint", "检查点": "checkpoint", "チェックポイント": "checkpoint",
    "체크포인트": "checkpoint", "保存": "save", "저장": "save", "加载": "load", "読み込み": "load", "로드": "load",
    "再开": "resume", "再開": "resume", "재개": "resume", "恢复": "resume", "重复": "duplicate", "日志": "log",
    "打印": "print", "ログ": "log", "로그": "log",
    # how it went wrong
    "报错": "error", "錯誤": "error", "错误": "error", "エラー": "error", "에러": "error", "오류": "error",
    "失败": "fail", "失敗": "fail", "실패": "fail", "崩溃": "crash", "挂掉": "crash", "挂了": "crash",
    "找不到": "not found", "速度慢": "slow", "变慢": "slow", "很慢": "slow", "遅い": "slow", "느림": "slow",
    "느려": "slow",
}
_pattern = None


def translate(text: str) -> str:
    """text with every known CJK phrase replaced by its English words (spaced, so they tokenize apart). text is
    expected lower-cased (the keys above hold lower-case Latin letters where they have any)."""
    global _pattern
    if text.isascii():
        return text
    if _pattern is None:
        import re

        _pattern = re.compile("|".join(re.escape(k) for k in sorted(_WORDS, key=len, reverse=True)))
    return _pattern.sub(lambda m: " " + _WORDS[m.group(0)] + " ", text)
