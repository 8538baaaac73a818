# Pure-Python models of builtins that kiln's capture runs through its
# bytecode evaluator instead of refusing: functools.reduce, itertools'
# iterators, map and filter, Counter's counting, heapq's nlargest, and the
# calls of operator's itemgetter and attrgetter (functools.partial and the
# getters are real objects: frontend/EvaluatorCalls.cpp; a partial over a
# tensor is the `partial` closure here), grad-mode decorators. Each follows
# its CPython documentation's equivalent code, written with what the
# evaluator models (lists, tuples, loops, generators). Generators made
# during capture run to exhaustion when called: an infinite one
# (itertools.count, repeat without times) ends the capture at the
# evaluator's instruction limit, and the frame runs in CPython. Two helpers
# the capture calls directly rather than through the evaluator: how an
# autocast call's arguments bind, and the stand-in for a value a sort key
# cannot order.
# Depends on nothing; read by frontend/EvaluatorCalls.cpp (POLYFILLS) and
# frontend/Evaluator.h (Handles).
import collections
import functools
import heapq
import inspect
import itertools

_MISSING = object()


def reduce(function, iterable, initial=_MISSING):
    items = list(iterable)
    start = 0
    if initial is _MISSING:
        if not items:
            raise TypeError("reduce() of empty iterable with no initial value")
        value = items[0]
        start = 1
    else:
        value = initial
    for index in range(start, len(items)):
        value = function(value, items[index])
    return value


def map_(function, *iterables):
    if len(iterables) == 1:
        for element in iterables[0]:
            yield function(element)
        return
    for elements in zip(*iterables):
        yield function(*elements)


def filter_(function, iterable):
    for element in iterable:
        if function is None:
            if element:
                yield element
        elif function(element):
            yield element


def chain(*iterables):
    for iterable in iterables:
        for element in iterable:
            yield element


def chain_from_iterable(iterables):
    for iterable in iterables:
        for element in iterable:
            yield element


def product(*iterables, repeat=1):
    pools = []
    for _ in range(repeat):
        for iterable in iterables:
            pools.append(tuple(iterable))
    results = [()]
    for pool in pools:
        grown = []
        for prefix in results:
            for element in pool:
                grown.append(prefix + (element,))
        results = grown
    for result in results:
        yield result


def accumulate(iterable, func=None, *, initial=None):
    total = initial
    started = initial is not None
    if started:
        yield total
    for element in iterable:
        if not started:
            total = element
            started = True
        elif func is None:
            total = total + element
        else:
            total = func(total, element)
        yield total


def islice(iterable, *bounds):
    if len(bounds) == 1:
        start, stop, step = 0, bounds[0], 1
    else:
        start, stop = bounds[0], bounds[1]
        step = bounds[2] if len(bounds) > 2 else 1
    start = 0 if start is None else start
    step = 1 if step is None else step
    position = 0
    wanted = start
    for element in iterable:
        if stop is not None and position >= stop:
            return
        if position == wanted:
            yield element
            wanted += step
        position += 1


def zip_longest(*iterables, fillvalue=None):
    columns = [list(iterable) for iterable in iterables]
    longest = 0
    for column in columns:
        longest = max(longest, len(column))
    for row in range(longest):
        values = []
        for column in columns:
            values.append(column[row] if row < len(column) else fillvalue)
        yield tuple(values)


def repeat(element, times=None):
    if times is None:
        while True:
            yield element
    for _ in range(times):
        yield element


def count(start=0, step=1):
    value = start
    while True:
        yield value
        value += step


def starmap(function, iterable):
    for arguments in iterable:
        yield function(*arguments)


def _choices(pool, r, distinct, ordered):
    # Index tuples of length r over len(pool) elements, in itertools' order.
    n = len(pool)
    results = [()]
    for _ in range(r):
        grown = []
        for prefix in results:
            low = prefix[-1] + 1 if (prefix and not ordered) else 0
            for index in range(low, n):
                if distinct and index in prefix:
                    continue
                grown.append(prefix + (index,))
        results = grown
    return results


def combinations(iterable, r):
    pool = tuple(iterable)
    for indices in _choices(pool, r, True, False):
        yield tuple(pool[i] for i in indices)


def combinations_with_replacement(iterable, r):
    pool = tuple(iterable)
    n = len(pool)
    results = [()]
    for _ in range(r):
        grown = []
        for prefix in results:
            for index in range(prefix[-1] if prefix else 0, n):
                grown.append(prefix + (index,))
        results = grown
    for indices in results:
        yield tuple(pool[i] for i in indices)


def permutations(iterable, r=None):
    pool = tuple(iterable)
    r = len(pool) if r is None else r
    for indices in _choices(pool, r, True, True):
        yield tuple(pool[i] for i in indices)


def pairwise(iterable):
    first = True
    previous = None
    for element in iterable:
        if not first:
            yield (previous, element)
        previous = element
        first = False


def takewhile(predicate, iterable):
    for element in iterable:
        if not predicate(element):
            return
        yield element


def dropwhile(predicate, iterable):
    dropping = True
    for element in iterable:
        if dropping and predicate(element):
            continue
        dropping = False
        yield element


def filterfalse(predicate, iterable):
    for element in iterable:
        if predicate is None:
            if not element:
                yield element
        elif not predicate(element):
            yield element


def dict_fromkeys(iterable, value=None):
    made = {}
    for key in iterable:
        made[key] = value
    return made


def ordered_dict_fromkeys(iterable, value=None):
    made = collections.OrderedDict()
    for key in iterable:
        made[key] = value
    return made


def defaultdict_fromkeys(iterable, value=None):
    made = collections.defaultdict()  # fromkeys gives no default factory
    for key in iterable:
        made[key] = value
    return made


def count_elements(mapping, iterable):
    """collections._count_elements, which Counter's update calls."""
    get = mapping.get
    for element in iterable:
        mapping[element] = get(element, 0) + 1


def nlargest(n, iterable, key=None):
    # heapq documents nlargest as equivalent to this.
    return sorted(iterable, key=key, reverse=True)[:n]


def nsmallest(n, iterable, key=None):
    return sorted(iterable, key=key)[:n]


def itemgetter_call(items, obj):
    """A call of operator.itemgetter(*items) (the real object stays the
    frame's value; its calls run this)."""
    if len(items) == 1:
        return obj[items[0]]
    return tuple(obj[item] for item in items)


def attrgetter_call(names, obj):
    """A call of operator.attrgetter(*names)."""
    values = []
    for name in names:
        value = obj
        for part in name.split("."):
            value = getattr(value, part)
        values.append(value)
    return values[0] if len(names) == 1 else tuple(values)


def compress(data, selectors):
    for element, selected in zip(data, selectors):
        if selected:
            yield element


# The builtin each model stands for (looked up by equality: a classmethod
# such as chain.from_iterable is a new bound object at each access).
POLYFILLS = {
    functools.reduce: reduce,
    map: map_,
    filter: filter_,
    itertools.chain: chain,
    itertools.chain.from_iterable: chain_from_iterable,
    itertools.product: product,
    itertools.accumulate: accumulate,
    itertools.islice: islice,
    itertools.zip_longest: zip_longest,
    itertools.repeat: repeat,
    itertools.count: count,
    itertools.starmap: starmap,
    itertools.combinations: combinations,
    itertools.combinations_with_replacement: combinations_with_replacement,
    itertools.permutations: permutations,
    itertools.pairwise: pairwise,
    itertools.takewhile: takewhile,
    itertools.dropwhile: dropwhile,
    itertools.filterfalse: filterfalse,
    itertools.compress: compress,
    dict.fromkeys: dict_fromkeys,
    collections.OrderedDict.fromkeys: ordered_dict_fromkeys,
    collections.defaultdict.fromkeys: defaultdict_fromkeys,
    collections._count_elements: count_elements,
    heapq.nlargest: nlargest,
    heapq.nsmallest: nsmallest,
}


def autocast_enabled(cls, args, kwargs):
    """Whether `cls(*args, **kwargs)` (torch.autocast, torch.cpu.amp.autocast,
    ...; constant arguments) turns autocast on. Called by the capture, not
    run through the evaluator."""
    bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
    bound.apply_defaults()
    return bool(bound.arguments["enabled"])


def grad_mode_wrapper(enabled, function):
    """torch.no_grad()(function) (enabled False) or enable_grad()(function):
    run through the evaluator, so `with` is its modelled grad-mode block."""
    import torch

    def wrapper(*args, **kwargs):
        with (torch.enable_grad() if enabled else torch.no_grad()):
            return function(*args, **kwargs)
    return wrapper


def partial(function, /, *bound, **bound_keywords):
    """functools.partial over a tensor or a function the frame made (the
    real partial object stands for the others): a closure that calls
    `function` with the bound arguments first, keywords given at the call
    overriding the bound ones."""
    def call(*args, **keywords):
        return function(*bound, *args, **{**bound_keywords, **keywords})
    return call


class Incomparable:
    """Stands for a value the capture cannot order (a tensor) in a sort key:
    comparing it raises, so a sort that reaches it is refused."""

    __slots__ = ()
    __hash__ = None

    def _refuse(self, other):
        raise TypeError("kiln: a sort key compared a value it cannot order")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
