"""Checks every request gets before its handler runs, driven by the message descriptors.

proto3 enums are open: a request may carry a number its enum does not define, and the generated
code keeps it as a plain int. Handlers would then fall back to a default or fail deep inside, so
the walk below rejects such values up front, for every enum field of every request message at any
depth (fields added later are covered without code changes).
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from helix_runner.errors import invalid_field

_ENUM = FieldDescriptor.TYPE_ENUM
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def check_enums(message: Message, prefix: str = "") -> None:
    """INVALID_ARGUMENT naming the first field (path such as ``options.on_disconnect`` or
    ``statuses[2]``) that holds an enum number its enum does not define."""
    for field, value in message.ListFields():
        path = prefix + field.name
        kind = field.type
        if kind != _ENUM and kind != _MESSAGE:
            continue
        if kind == _MESSAGE and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                _check_value(value_field, item, f"{path}[{key!r}]")
        elif field.is_repeated:
            for index, item in enumerate(value):
                _check_value(field, item, f"{path}[{index}]")
        else:
            _check_value(field, value, path)


def _check_value(field: FieldDescriptor, value: object, path: str) -> None:
    if field.type == _ENUM:
        if value not in field.enum_type.values_by_number:
            raise invalid_field(path, f"{value} is not a value of {field.enum_type.full_name}")
    elif field.type == _MESSAGE:
        check_enums(value, path + ".")  # type: ignore[arg-type]
